"""The portal's django-allauth account adapter (ACCOUNT_ADAPTER)."""

from allauth.account.adapter import DefaultAccountAdapter


class AccountAdapter(DefaultAccountAdapter):
    def _get_login_attempts_cache_key(self, request, **credentials) -> str:
        """The key of the per-account failed-login limit ("5/5m/key"): the email alone.

        allauth's default prefixes the request's host (get_current_site without the sites
        framework is request.get_host(), port included), so a client varying the Host header's
        port got a fresh counter each time (issue 31). The portal serves one site, so the email
        names the account. allauth uses this one method both to count failures and to clear
        them after a password reset, so overriding it keeps the two in step."""
        return credentials.get("email", credentials.get("username", "")).lower()
