"""Classroom tooling: the course manifest, exports of template repositories, platform outputs,
integrity manifests and regrades."""
