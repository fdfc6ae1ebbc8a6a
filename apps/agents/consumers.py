"""The web terminal's WebSocket (`terminal` has the rules, the session and the frames)."""

import asyncio
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncWebsocketConsumer

from apps.agents import terminal


class TerminalConsumer(AsyncWebsocketConsumer):
    """/ws/instances/<id>/terminal/: a root shell in the host, for as long as the socket lives."""

    session = None
    opened = None
    relay = None

    async def connect(self):
        # Accepted first: a refusal is then a close code the page can explain (a socket refused
        # before its handshake only reads as "failed" in the browser).
        await self.accept()
        user = self.scope.get("user")
        client = self.scope.get("client") or (None, None)
        self.ip_address = client[0]
        try:
            self.instance = await database_sync_to_async(terminal.terminal_target)(
                user=user, instance_id=self.scope["url_route"]["kwargs"]["instance_id"]
            )
            self.session = await terminal.TerminalSession.open(
                endpoint=terminal.endpoint_of(self.instance),
                key_id=f"loam-terminal:{user.get_username()}:instance-{self.instance.pk}",
                size=terminal.terminal_size(parse_qs(self.scope["query_string"].decode())),
            )
        except terminal.TerminalRefused as refused:
            await self.close(code=refused.code)
            return
        self.user = user
        self.opened = await database_sync_to_async(terminal.record_opened)(
            user=user, instance=self.instance, ip_address=self.ip_address
        )
        self.relay = asyncio.create_task(self._relay())

    async def _relay(self):
        await self.session.relay_output(lambda data: self.send(bytes_data=data))
        await self._end()
        await self.close(code=terminal.SHELL_ENDED)

    async def receive(self, text_data=None, bytes_data=None):
        if self.session is None:
            return
        if bytes_data is not None:
            self.session.write(bytes_data)
        elif (size := terminal.resize_of(text_data or "")) is not None:
            self.session.resize(size)

    async def disconnect(self, code):
        if self.relay is not None and self.relay is not asyncio.current_task():
            self.relay.cancel()
        await self._end()

    async def _end(self):
        """Close the SSH session and record how long it lasted, once."""
        session, self.session = self.session, None
        if session is None:
            return
        await session.close()
        await database_sync_to_async(terminal.record_closed)(
            user=self.user, instance=self.instance, opened=self.opened, ip_address=self.ip_address
        )
