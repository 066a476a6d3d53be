"""`make inspect`: reading/inspect.py's picture of one item, with the command line's exit codes.

    python -m pipeline.inspect STORE ITEM OUT.png        (make inspect ITEM=<id>)
"""

from __future__ import annotations

from reading import inspect
from store import open_store


def main(argv: list[str] | None = None) -> None:
    """An unknown item or a path that is no store ends in one line on stderr (exit 2), not a traceback."""
    import sys

    from pipeline import exitcodes

    try:
        inspect.main(argv)
    except KeyError as e:  # the item: say which ones there are
        store = (argv if argv is not None else sys.argv[1:])[0]
        known = sorted({m.id for m in open_store(store).media_items()})
        print(f"{e.args[0]}; the store has {len(known)} item(s), e.g. {', '.join(known[:8])}", file=sys.stderr)
        sys.exit(exitcodes.BAD_INPUT)
    except (FileNotFoundError, ValueError) as e:
        print(e, file=sys.stderr)
        sys.exit(exitcodes.BAD_INPUT)


if __name__ == "__main__":
    main()
