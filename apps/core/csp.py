"""The Content-Security-Policy header on every response (Django 5.2 has no CSP of its own).

The policy is `settings.LOAM_CSP`, directive -> sources. Pages load scripts from this site
only: our own JavaScript lives in static files (behaviour is asked for with data attributes,
see static/js/loam.js). The few pages whose inline script a library renders (drf-spectacular's
Swagger UI) mark it with the request's nonce, `{{ request.csp_nonce }}`, which the source
"'nonce'" stands for. Styles may be inline: ReDoc and Swagger UI inject theirs, and inline
styles cannot run code.
"""

import secrets

from django.conf import settings

NONCE = "'nonce'"


def policy(directives: dict, nonce: str) -> str:
    parts = []
    for directive, sources in directives.items():
        values = [f"'nonce-{nonce}'" if source == NONCE else source for source in sources]
        parts.append(" ".join([directive, *values]))
    return "; ".join(parts)


class ContentSecurityPolicyMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        request.csp_nonce = secrets.token_urlsafe(16)
        response = self.get_response(request)
        header = (
            "Content-Security-Policy-Report-Only"
            if settings.LOAM_CSP_REPORT_ONLY
            else "Content-Security-Policy"
        )
        if settings.LOAM_CSP and header not in response:
            response[header] = policy(settings.LOAM_CSP, request.csp_nonce)
        return response
