"""Keep secrets out of logs and result files: storage URLs are printed and stored only through `redact`."""
from __future__ import annotations

import re

MASK = "***"
# scheme://user:password@host...; the password runs to the last '@', so an unencoded '@' or '/' in it stays hidden.
_USERINFO = re.compile(r"^(?P<head>[A-Za-z][\w+.-]*://[^:/@?#]*:)(?P<secret>.*)@(?P<host>[^@]*)$")
# Query parameters that carry secrets (libpq, pyarrow S3/GCS URIs, presigned tokens).
_SECRET_PARAM = re.compile(r"(?P<name>[?&](?:password|sslpassword|secret_key|secret|access_key|session_token|"
                           r"token|aws_secret_access_key|aws_session_token)=)[^&#]*", re.IGNORECASE)


def redact(url: str) -> str:
    """`url` with any password or secret query value replaced by ***; other text is returned unchanged."""
    m = _USERINFO.match(url)
    if m and m["secret"]:
        url = f"{m['head']}{MASK}@{m['host']}"
    return _SECRET_PARAM.sub(lambda p: p["name"] + MASK, url)
