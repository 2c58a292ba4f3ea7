"""``python -m cudafuzz ...`` and the ``cudafuzz`` script: the same command line as the binary."""

import sys


def main() -> None:
    try:
        from ._native import main as native_main
    except ImportError as e:  # a build for another platform or Python
        sys.stderr.write(f"cudafuzz: the extension module does not load in {sys.executable}: {e}; reinstall with pip install --force-reinstall cudafuzz\n")
        raise SystemExit(4)
    raise SystemExit(native_main(["cudafuzz", *sys.argv[1:]]))


if __name__ == "__main__":
    main()
