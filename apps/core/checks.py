from django.conf import settings
from django.core.checks import Error, Tags, register


@register(Tags.security, deploy=True)
def development_secret_key(app_configs, **kwargs):
    if settings.SECRET_KEY == settings.DEVELOPMENT_SECRET_KEY:
        return [
            Error(
                "SECRET_KEY is the development default.",
                hint="Set SECRET_KEY in the environment to a long random value.",
                id="loam.E001",
            )
        ]
    return []
