"""CLI subcommands: each module exposes ``add_arguments(parser)`` and ``run(args)``; see ``workbench.cli.COMMANDS``."""
