"""Fork sandbox, kernel side: miniature runs (placeholder during development)."""
