"""One module per `ppomq` subcommand; each exposes `register(subparsers)`."""
