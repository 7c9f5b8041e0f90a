"""``teacache-calib drift``: what an mflux (or MLX) release changed under the adapters, in code and in numbers.

``code`` fingerprints the mflux functions the adapters hook, re-walk or read; ``numbers`` runs the embedded
random-weight model of every family; ``verdict`` turns both into one decision per variant; ``command`` is
the subcommand. The committed tables it compares with live in ``calib/drift/data``.
"""
