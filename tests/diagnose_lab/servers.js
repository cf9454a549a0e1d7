// Node.js HTTP servers for the diagnose lab, written the way a Node application would be.
//
//   node servers.js ADDR PORT
//       http.createServer with every default (keep-alive, the socket's TCP_NODELAY as Node sets
//       it), answering each request with a 612-byte body in one res.end().
//   node servers.js ADDR PORT --nagle
//       the same server, but each connection's socket.setNoDelay(false) (Nagle on), and each
//       response in two writes: the headers (res.flushHeaders()), then the body a tick later
//       (setImmediate), after the headers have gone.
"use strict";

const http = require("http");

const [addr, port, mode] = process.argv.slice(2);
const body = Buffer.alloc(612, "n");
const nagle = mode === "--nagle";

const server = http.createServer((req, res) => {
  if (!nagle) {
    res.end(body);
    return;
  }
  res.writeHead(200, { "Content-Type": "text/plain", "Content-Length": body.length });
  res.flushHeaders();
  setImmediate(() => res.end(body));
});

if (nagle) {
  server.on("connection", (socket) => socket.setNoDelay(false));
}

server.listen(Number(port), addr, () => console.log("ready"));
