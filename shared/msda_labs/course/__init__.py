"""The course model: the manifest ``classroom.yml`` and the ladder of rules every lab teaches."""
