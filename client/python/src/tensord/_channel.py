"""Opening the gRPC channel to a tensord server, as the C++ client's MakeChannel does.

Contract: open_channel(address, token_file, tls, tls_ca_file, tls_cert_file,
tls_key_file, tls_server_name) -> (channel, metadata). The address is the
argument, else $TENSORD_ADDRESS, else 127.0.0.1:50051. TLS is on when `tls`
is true or a CA or client certificate is named (each file argument falls
back to $TENSORD_TLS_CA, $TENSORD_CLIENT_CERT, $TENSORD_CLIENT_KEY). The
token (first line of token_file or $TENSORD_TOKEN_FILE) becomes the
`authorization: Bearer <token>` metadata the caller sends with every call
(returned, not baked into the channel, so that it also works on a plaintext
loopback channel). Unreadable files raise TensordError(INVALID_ARGUMENT).
"""
import os
import time

import grpc

from tensord._errors import TensordError

DEFAULT_ADDRESS = "127.0.0.1:50051"
# The C++ client's message limits: a Fetch chunk or a Create of 64 MiB fits.
MAX_MESSAGE_BYTES = 64 << 20


def resolve_address(address=None):
    return address or os.environ.get("TENSORD_ADDRESS") or DEFAULT_ADDRESS


def _read(path, what):
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise TensordError(grpc.StatusCode.INVALID_ARGUMENT,
                           f"cannot read the {what} file '{path}': {e.strerror}") from None


def open_channel(address=None, token_file=None, tls=False, tls_ca_file=None,
                 tls_cert_file=None, tls_key_file=None, tls_server_name=None):
    env = os.environ.get
    token_file = token_file or env("TENSORD_TOKEN_FILE")
    tls_ca_file = tls_ca_file or env("TENSORD_TLS_CA")
    tls_cert_file = tls_cert_file or env("TENSORD_CLIENT_CERT")
    tls_key_file = tls_key_file or env("TENSORD_CLIENT_KEY")
    target = resolve_address(address)
    options = [("grpc.max_receive_message_length", MAX_MESSAGE_BYTES),
               ("grpc.max_send_message_length", MAX_MESSAGE_BYTES),
               # A dropped connection is tried again within 100 ms, and a
               # failing one at most every second: gRPC's defaults (1 s,
               # growing to 2 min) fail calls at once meanwhile, which
               # outlasted the command stream's reconnect tries (_stream.py)
               # when a connection was cut during a reconnect. Not
               # grpc.min_reconnect_backoff_ms: despite its name gRPC takes
               # it as the connect timeout (default 20 s), and at 100 ms a
               # connect slowed by load failed ("tcp handshaker shutdown").
               ("grpc.initial_reconnect_backoff_ms", 100),
               ("grpc.max_reconnect_backoff_ms", 1000)]
    if tls or tls_ca_file or tls_cert_file:
        if bool(tls_cert_file) != bool(tls_key_file):
            raise TensordError(grpc.StatusCode.INVALID_ARGUMENT,
                               "a client certificate needs its key, and a key its certificate")
        credentials = grpc.ssl_channel_credentials(
            root_certificates=_read(tls_ca_file, "TLS CA") if tls_ca_file else None,
            private_key=_read(tls_key_file, "TLS key") if tls_key_file else None,
            certificate_chain=_read(tls_cert_file, "TLS certificate") if tls_cert_file else None)
        if tls_server_name:
            options.append(("grpc.ssl_target_name_override", tls_server_name))
        channel = grpc.secure_channel(target, credentials, options=options)
    else:
        channel = grpc.insecure_channel(target, options=options)
    metadata = ()
    if token_file:
        lines = _read(token_file, "token").decode().splitlines()
        token = lines[0].rstrip("\r ") if lines else ""
        if token:
            metadata = (("authorization", "Bearer " + token),)
    return channel, metadata



def backoff(channel, seconds):
    """Sleeps `seconds` before a call is tried again, watching `channel`
    meanwhile. The reconnect loops wait here rather than in time.sleep:
    while a channel has no call in flight nothing in grpcio drives its
    connection attempt (seen here under load: a connect to a live server
    pending for seconds, the channel failing every call at once meanwhile,
    until the stream's tries ran out); a readiness watch does. The whole
    backoff is slept even when the channel connects sooner: a retry may be
    answered UNAVAILABLE by a server still finishing the first try."""
    deadline = time.monotonic() + seconds
    future = grpc.channel_ready_future(channel)
    try:
        future.result(timeout=seconds)
    except grpc.FutureTimeoutError:
        pass
    finally:
        future.cancel()
    rest = deadline - time.monotonic()
    if rest > 0:
        time.sleep(rest)
