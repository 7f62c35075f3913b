"""Interoperability with other LDP systems' files (Google RAPPOR)."""
