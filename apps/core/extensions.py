"""Extension points: how an app uses something an app above it provides, without importing it.

The lower app declares the point beside the code that calls it; the app above plugs its
provider in from its `AppConfig.ready()`. Every import then points down the floors
(docs/architecture.md) while each call stays explicit: grep a point's name to find both ends.
"""

from collections.abc import Callable

from django.core.exceptions import ImproperlyConfigured


class ExtensionPoint:
    def __init__(self, name: str):
        self.name = name
        self._providers: list[Callable] = []

    def plug(self, provider: Callable) -> Callable:
        """Add a provider (once: `ready()` may run again in a test's reloaded registry)."""
        if provider not in self._providers:
            self._providers.append(provider)
        return provider

    def providers(self) -> tuple[Callable, ...]:
        return tuple(self._providers)

    def one(self) -> Callable:
        """The single provider of a point that must have exactly one."""
        if len(self._providers) != 1:
            raise ImproperlyConfigured(
                f"{self.name}: expected one provider, found {len(self._providers)}"
            )
        return self._providers[0]

    def __repr__(self):
        return f"<ExtensionPoint {self.name}: {len(self._providers)} provider(s)>"
