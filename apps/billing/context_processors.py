from apps.billing.models import Meter, Wallet


def wallet_banner(request):
    """The low-balance banner: shown to the organization's members while the wallet is low."""
    organization = getattr(request, "organization", None)
    if organization is None:
        return {}
    wallet = Wallet.objects.filter(organization=organization).first()
    if wallet is None or (wallet.low_balance_warned_at is None and wallet.available_minor > 0):
        return {}
    # An organization that never ran anything is told to top up, not that hosts were stopped.
    return {
        "low_wallet": wallet,
        "wallet_never_used": not Meter.objects.filter(organization=organization).exists(),
    }
