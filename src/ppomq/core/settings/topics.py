"""The topics a command's `--help` groups its settings under, most used first.

A setting's topic is the first topic that names it, else the first whose settings groups
declare it, else the last (advanced): so a new field of a group lands with its group's
topic without a word here, and only the few a topic picks out by hand are named.
"""

from __future__ import annotations

from dataclasses import dataclass

from pydantic_settings import BaseSettings

from ppomq.core.settings._base import SettingsGroup
from ppomq.core.settings.groups import (
    ActorLoopSettings,
    CommonSettings,
    CurveClientSettings,
    CurveServerSettings,
    EnvSettings,
    LearnerGroupSettings,
    PPOSettings,
    RedisSettings,
    RunSettings,
    TransportSettings,
    WeightStoreSettings,
)


@dataclass(frozen=True)
class Topic:
    title: str
    description: str
    # Named settings, listed first and in this order, whichever group declares them.
    fields: tuple[str, ...] = ()
    # Every other setting these groups declare, in the settings model's order.
    groups: tuple[type[SettingsGroup], ...] = ()


TOPICS: tuple[Topic, ...] = (
    Topic(
        "common settings",
        "What most runs set; everything below has a default that works.",
        fields=(
            "env_id",
            "preset",
            "total_steps",
            "duration_s",
            "target_return",
            "actors",
            "num_envs",
            "seed",
            "device",
            "run_dir",
            "run_id",
        ),
    ),
    Topic(
        "PPO",
        "The update, its batches, and how stale a batch may be.",
        fields=("mode",),
        groups=(PPOSettings,),
    ),
    Topic(
        "model",
        "The policy network (its spec travels with the weights).",
        fields=("arch", "hidden_sizes", "activation", "lstm_size", "norm_obs"),
    ),
    Topic(
        "actors and envs",
        "How actors step their envs and fetch weights.",
        fields=("num_steps", "restart_actors", "actor_index", "learner_addr", "weightserver_addr"),
        groups=(EnvSettings, ActorLoopSettings),
    ),
    Topic(
        "transport and security",
        "ZeroMQ sockets, their limits, and CURVE.",
        fields=("rollout_bind", "weightserver_bind", "bind", "curve"),
        groups=(TransportSettings, CurveServerSettings, CurveClientSettings),
    ),
    Topic(
        "Redis and weight versions",
        "Where versions are published and how many are kept.",
        fields=("redis_url", "keep_versions", "poll_interval_s"),
        groups=(RedisSettings, WeightStoreSettings),
    ),
    Topic(
        "run dir, records and logs",
        "Checkpoints, evaluation, resuming, logs and metrics.",
        fields=("progress",),
        groups=(RunSettings, CommonSettings),
    ),
    Topic(
        "learner group",
        "Several learners that train one policy together (DD-PPO).",
        fields=("learners",),
        groups=(LearnerGroupSettings,),
    ),
    Topic(
        "advanced",
        "The learner's internals; the defaults suit most runs.",
        fields=(
            "gradients",
            "queue_batches",
            "forget_actor_after_s",
            "max_actors",
            "torch_threads",
        ),
    ),
)


def topic_of(cls: type[BaseSettings], name: str) -> Topic:
    """The topic setting `name` of `cls` is shown under."""
    for topic in TOPICS:
        if name in topic.fields:
            return topic
    declared = [c for c in cls.__mro__ if name in vars(c).get("__annotations__", {})]
    for topic in TOPICS:
        if any(c in topic.groups for c in declared):
            return topic
    return TOPICS[-1]


def settings_by_topic(cls: type[BaseSettings]) -> list[tuple[Topic, list[str]]]:
    """`cls`'s settings grouped by topic, topics in TOPICS' order and none left empty;
    in each, the named settings first, then the rest in the model's order."""
    names = list(cls.model_fields)
    out = []
    for topic in TOPICS:
        mine = [n for n in names if topic_of(cls, n) is topic]
        named = [n for n in topic.fields if n in mine]
        if mine:
            out.append((topic, named + [n for n in mine if n not in named]))
    return out
