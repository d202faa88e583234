import sys

try:
    from .cli import entry
except KeyboardInterrupt:           # Ctrl-C while the CLI's modules are imported: no traceback
    print("clef-prof: interrupted", file=sys.stderr)
    sys.exit(130)

sys.exit(entry())
