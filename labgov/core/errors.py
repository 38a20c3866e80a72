class DomainError(Exception):
    """A rule of the domain was broken; the message is written for the person who broke it.

    `field` names the input the message is about, so forms can show it beside that field.
    """

    def __init__(self, message: str, *, field: str | None = None):
        super().__init__(message)
        self.message = message
        self.field = field
