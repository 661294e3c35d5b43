// The page's small forms. A "new agent" form shows the folder the agent will get while the name (or a
// folder) is typed; the server answers with the same rule that creates it, so the two never disagree.
// Without this script the form still works; only the preview is missing.
(function () {
  document.querySelectorAll("form[data-folder-preview]").forEach(function (form) {
    var out = form.querySelector("output[data-folder]");
    var name = form.querySelector('[name="name"]');
    var folder = form.querySelector('[name="folder"]');
    if (!out || !name || !folder) return;
    var timer = null, asked = 0;
    function update() {
      clearTimeout(timer);
      timer = setTimeout(function () {
        var mine = ++asked;
        var query = new URLSearchParams({ name: name.value, folder: folder.value });
        fetch(form.dataset.folderPreview + "?" + query, { headers: { Accept: "application/json" },
                                                         credentials: "same-origin" })
          .then(function (r) { return r.json(); })
          .then(function (data) {
            if (mine === asked) out.textContent = data.folder || data.error || "(from the name)";
          })
          .catch(function () { /* the preview is a hint only */ });
      }, 150);
    }
    name.addEventListener("input", update);
    folder.addEventListener("input", update);
    if (name.value || folder.value) update();
  });
})();
