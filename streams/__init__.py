"""Topic layout, channel mapping, the proxy, the client and the command line."""
