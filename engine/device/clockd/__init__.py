"""The clock service: one root daemon that is the only writer of clocks, governors, the EMC
lock and nvpmodel, serving a whitelisted line-JSON protocol to a group over a Unix socket.

`protocol` (the requests and replies), `framing` (reading request lines: the length cap and the
idle timeout), `membership` (who may connect, and the error that names the group to join),
`server` (the service: who holds the board, each request, each connection), `listener` (the
daemon's socket, accept loop and stopping signals), `client` (the client and `ServiceDevice`,
the Device whose writes go through the socket), `install` (the systemd unit and the group).
docs/security.md describes the threat model.
"""
