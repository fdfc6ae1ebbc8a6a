"""Domain errors raised by services; views and the API turn them into form errors or
problem+json responses in one place."""


class DomainError(Exception):
    """A use case refused: the message is for the user (translated), the code for machines."""

    code = "domain_error"
    status = 400

    def __init__(self, message, *, code=None, status=None):
        super().__init__(message)
        self.message = message
        if code:
            self.code = code
        if status:
            self.status = status


class InvalidTransition(DomainError):
    code = "invalid_transition"
    status = 409


class PermissionDenied(DomainError):
    code = "permission_denied"
    status = 403
