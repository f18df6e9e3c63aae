from __future__ import annotations

from typing import Iterator

from tfdoctor.lint.facts import ModuleFacts
from tfdoctor.lint.findings import Severity, Violation
from tfdoctor.lint.rule import Context, Rule


class ParseError(Rule):
    """
    ## What it does
    Reports a file that cannot be parsed as Python 3: a syntax error, Python 2 code, an unknown or wrong
    source encoding, a binary file named `.py`, or code nested deeper than Python's own parser accepts
    (more than 200 open brackets, or about 3,000 levels of expressions). The finding carries the line and
    column of the error; the other files are linted as usual.

    ## Why it is bad
    A file tfdoctor cannot parse is a file it cannot check, and usually one Python cannot import either.

    ## Example
    ```python
    import tensorflow as tf
    print "training"  # TFD000
    ```

    ## Use instead
    ```python
    import tensorflow as tf
    print("training")
    ```
    """

    code = "TFD000"
    name = "parse-error"
    severity = Severity.ERROR
    IN_TESTS = True
    summary = "The file cannot be parsed; reported with its position, the other files are still linted."
    INVALID = (
        "import tensorflow as tf\ndef step(x:  # TFD000\n    return x\n",
        "import tensorflow as tf\nexec 'x = 1'  # TFD000\n",
    )
    VALID = (
        "import tensorflow as tf\nx = tf.constant(1)\n",
        "",
        "# an empty module that mentions tensorflow only in a comment\n",
    )

    def check(self, facts: ModuleFacts, context: Context) -> Iterator[Violation]:
        """Parse errors are found by the engine before any facts exist; there is nothing to check here."""
        return iter(())
