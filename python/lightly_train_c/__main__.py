"""``python -m lightly_train_c ...`` and the ``lightly-train-c`` console script:
the program itself, with every command (``lightly-train-c --help``)."""

import sys

from lightly_train_c._program import exec_program


def main() -> None:
    exec_program(sys.argv[1:])


if __name__ == "__main__":
    main()
