"""The kernel layer: one live Jupyter kernel per session, wherever it runs.

Owns the session (execute engine, timeout ladder, death detection, rebuild),
output folding, execution results, the kernel's environment, our kernelspec
and launcher, limits, the bubblewrap sandbox and the workspace seam. It imports nothing from the
layers above it (model seam, agent, notebook, front ends); a test holds it to that.
"""
