"""The edge of every Grid listener, pure: which connections it holds, and which it refuses.

- `connections`: the one connection ledger (`ConnectionBook`) every HTTP listener keeps,
  from TCP accept through the TLS handshake and classification to close.
"""
