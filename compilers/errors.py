"""One-line descriptions of what a library raised, for the errors the compile passes report."""


def describe_error(err: BaseException) -> str:
    """``Type: first line of the message``: what a library's exception says, in one line."""
    text = str(err).strip()
    return f"{type(err).__name__}: {text.splitlines()[0] if text else ''}"
