# Run by IPython in the kernel's namespace at start (PYTHONSTARTUP, set by the session): one
# expression, so no name is left behind for the analysed code to see.
__import__("kernel_agent.kernel.inside.figure_cap", fromlist=["install"]).install()
