"""Tests that need a GPU and a full-size model build (``make test-gpu``); skipped elsewhere, with the reason."""
