"""Tools for people who write the course: the solution-fence parser and the handout sync."""
