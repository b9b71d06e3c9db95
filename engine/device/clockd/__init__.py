"""The clock service: one root daemon that is the only writer of clocks, governors, the EMC
lock and nvpmodel, serving a whitelisted line-JSON protocol to a group over a Unix socket.

`protocol` (the requests and replies), `server` (the daemon), `client` (the client and
`ServiceDevice`, the Device whose writes go through the socket), `install` (the systemd unit
and the group). docs/security.md describes the threat model.
"""
