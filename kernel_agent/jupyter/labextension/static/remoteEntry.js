/* kernel-agent-follow: a notebook that kernel-agent writes into (its JupyterLab chat) follows the newest
   round. Hand-written, no build step: a module-federation container as JupyterLab loads one (init, get),
   sharing nothing, with one plugin that needs no token (it reads the shell's notebooks duck-typed).

   When a cell of a new round arrives (its metadata.kernel_agent.round is higher than any seen in that
   notebook), the notebook scrolls it to the top of its view, unless the user has scrolled up since:
   then it waits until the user is back at the newest round or the end. */
var _JUPYTERLAB;
(function () {
  "use strict";
  var NAME = "kernel-agent-follow";

  function agentRound(cellModel) {
    var about = cellModel && cellModel.getMetadata ? cellModel.getMetadata("kernel_agent") : null;
    var round = about && about.round;
    return typeof round === "number" && round >= 1 ? round : 0;
  }

  function follow(panel) {
    var notebook = panel.content;
    var model = notebook.model;
    if (!model || notebook.__kernelAgentFollow) return;
    notebook.__kernelAgentFollow = true;
    var newest = 0;
    for (var i = 0; i < model.cells.length; i++) newest = Math.max(newest, agentRound(model.cells.get(i)));
    var paused = false;
    var scroller = notebook.outerNode || notebook.node;
    scroller.addEventListener("wheel", function (event) { if (event.deltaY < 0) paused = true; }, { passive: true });
    scroller.addEventListener("scroll", function () {
      if (scroller.scrollHeight - scroller.scrollTop - scroller.clientHeight < 40) paused = false;
    }, { passive: true });
    model.cells.changed.connect(function (_cells, change) {
      if (change.type !== "add") return;
      change.newValues.forEach(function (cellModel, offset) {
        var round = agentRound(cellModel);
        if (round <= newest) return;
        newest = round;
        if (paused) return;
        var index = change.newIndex + offset;
        Promise.resolve().then(function () {
          var done = notebook.scrollToItem ? notebook.scrollToItem(index, "start") : null;
          if (!done && notebook.widgets[index]) notebook.widgets[index].node.scrollIntoView({ block: "start" });
        });
      });
    });
  }

  function watch(app) {
    var scan = function () {
      for (var widget of app.shell.widgets("main")) {
        if (widget && widget.content && widget.context && /\.ipynb$/.test(widget.context.path)) {
          (function (panel) { panel.context.ready.then(function () { follow(panel); }); })(widget);
        }
      }
    };
    if (app.shell.layoutModified) app.shell.layoutModified.connect(scan);
    app.restored.then(scan);
  }

  var plugin = {
    id: NAME + ":plugin",
    description: "A notebook kernel-agent writes into follows its newest round.",
    autoStart: true,
    requires: [],
    activate: watch,
  };

  _JUPYTERLAB = typeof _JUPYTERLAB === "undefined" ? {} : _JUPYTERLAB;
  window._JUPYTERLAB = _JUPYTERLAB;
  _JUPYTERLAB[NAME] = {
    init: function () { return Promise.resolve(); },
    get: function (module) {
      if (module !== "./extension" && module !== "./index") {
        return Promise.reject(new Error("Module " + module + " does not exist in container."));
      }
      return Promise.resolve(function () { return { __esModule: true, default: [plugin] }; });
    },
  };
})();
