"""`ppomq train`: Redis, a weightserver, a learner and K actors as real local processes.

The launcher only starts, watches and stops processes; every piece is the same service a
container would run, configured through the same `PPOMQ_*` variables. The Python children
are forked from one preloading server (ppomq.launch.zygote), so torch & co. are imported once and
shared; Redis is a plain subprocess. Children log to run_dir/logs/; the terminal shows one
progress line read from the learner's Redis status.
"""

# One job a module: child (one supervised process), wiring (what each child is told: its
# settings, environment and addresses), supervisor (Launcher: start, watch, restart),
# shutdown (the warm stop, hurried by further signals), messages (the launcher's one-line
# notes and errors), progress (the live line, the closing summary), train (`run_train`),
# zygote (the preloading fork server).
