"""JSON text written and read by the stdlib's C encoder and scanner, each made once.

``json.dumps`` builds a new encoder on every call and ``json.loads`` goes
through three Python functions and two regular expressions before its scanner
runs: for the small values signoff stores, digests and chains, that costs as
much as the work itself (under callgrind a result's ``dumps`` 23 thousand
instructions against 12, its ``loads`` 16 against 8). The encoders here are the
stdlib's own, with its options, made once; where the C accelerator is missing
they are its Python ones.
"""

import json
from json.encoder import c_make_encoder, encode_basestring, encode_basestring_ascii
from json.scanner import c_make_scanner


def _refuse(value):
    raise TypeError(f"Object of type {value.__class__.__name__} is not JSON serializable")


def encoder(ensure_ascii=True, separators=(", ", ": "), sort_keys=False, allow_nan=True):
    """A function that writes a value as ``json.dumps`` given these options writes it
    (no check for circular containers: a value that holds itself ends in
    ``RecursionError``)."""
    if c_make_encoder is None:
        return json.JSONEncoder(ensure_ascii=ensure_ascii, separators=separators,
                                sort_keys=sort_keys, allow_nan=allow_nan).encode
    chunks = c_make_encoder(None, _refuse,
                            encode_basestring_ascii if ensure_ascii else encode_basestring,
                            None, separators[1], separators[0], sort_keys, False, allow_nan)
    join = "".join

    def dumps(value):
        return join(chunks(value, 0))
    return dumps


dumps = encoder()  # json.dumps(value) with its defaults
_SCAN = c_make_scanner(json.JSONDecoder()) if c_make_scanner is not None else None


def loads(text):
    """``json.loads(text)``: the scanner alone reads a text that is one value with no
    whitespace around it (what ``dumps`` and the engines' JSON columns give);
    anything else, errors included, goes the stdlib's whole way."""
    if _SCAN is not None and type(text) is str:
        try:
            value, end = _SCAN(text, 0)
        except StopIteration:
            pass
        else:
            if end == len(text):
                return value
    return json.loads(text)
