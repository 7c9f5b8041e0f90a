"""Side by side with mlx-teacache: its wrapper as a timed arm, its gate replayed on our traces, its table."""
