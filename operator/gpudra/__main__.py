"""`python -m gpudra` is the same as the `gpudra` command."""

from gpudra.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
