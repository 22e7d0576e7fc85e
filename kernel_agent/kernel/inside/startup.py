# Run by IPython in the kernel's namespace at start (PYTHONSTARTUP, set by the session): one
# expression, so no name is left behind for the analysed code to see. The output cap first; the figure
# cap then runs the user's own PYTHONSTARTUP, if any.
(
    __import__("kernel_agent.kernel.inside.output_cap", fromlist=["install"]).install(),
    __import__("kernel_agent.kernel.inside.figure_cap", fromlist=["install"]).install(),
)
