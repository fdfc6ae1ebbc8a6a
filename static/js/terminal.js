// The web terminal (templates/agents/instance_terminal.html; frames in apps/agents/terminal.py):
// binary frames are the terminal's bytes both ways, a text frame from here asks for a new pty
// size. A closed socket says why (its close code) and offers to reconnect.
(function () {
  "use strict";

  function start() {
    const screen = document.getElementById("terminal");
    const status = document.getElementById("terminal-status");
    const again = document.getElementById("terminal-reconnect");
    const term = new Terminal({ cursorBlink: true, scrollback: 5000, convertEol: false });
    const fit = new FitAddon.FitAddon();
    const encoder = new TextEncoder();
    let socket = null;
    term.loadAddon(fit);
    term.open(screen);
    fit.fit();

    function say(text) {
      status.textContent = text;
    }

    function connect() {
      again.hidden = true;
      term.reset();
      const scheme = window.location.protocol === "https:" ? "wss:" : "ws:";
      const query = "?cols=" + term.cols + "&rows=" + term.rows;
      socket = new WebSocket(scheme + "//" + window.location.host + screen.dataset.socketPath + query);
      socket.binaryType = "arraybuffer";
      socket.addEventListener("message", function (event) {
        if (typeof event.data !== "string") {
          if (status.dataset.state !== "open") {
            status.dataset.state = "open";
            say(screen.dataset.connected);
          }
          term.write(new Uint8Array(event.data));
        }
      });
      socket.addEventListener("close", function (event) {
        status.dataset.state = "closed";
        say(screen.dataset["close-" + event.code] ||
            (event.code === 1000 ? screen.dataset.ended : screen.dataset.lost));
        again.hidden = false;
      });
      term.focus();
    }

    term.onData(function (data) {
      if (socket && socket.readyState === WebSocket.OPEN) {
        socket.send(encoder.encode(data));
      }
    });
    term.onResize(function (size) {
      if (socket && socket.readyState === WebSocket.OPEN) {
        socket.send(JSON.stringify({ type: "resize", cols: size.cols, rows: size.rows }));
      }
    });
    window.addEventListener("resize", function () { fit.fit(); });
    again.addEventListener("click", function () {
      delete status.dataset.state;
      say(screen.dataset.connecting);
      connect();
    });
    connect();
  }

  document.addEventListener("DOMContentLoaded", start);
})();
