"""`acme-agent` (and `python -m acme_agent`): the nexus command line with acme-agent's installed config."""

from nexus_core.cli import run_distribution


def main() -> None:
    run_distribution("acme-agent")


if __name__ == "__main__":
    main()
