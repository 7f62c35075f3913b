"""One-off studies: the measurements behind a design choice (docs/), including alternatives not shipped."""
