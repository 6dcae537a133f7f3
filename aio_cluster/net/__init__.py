"""Small network helpers that both server packages share.

Modules::

    addresses.py    parsing "host:port" server lists
    tls.py          TLS handshakes that tell a refused certificate from a server away
"""
