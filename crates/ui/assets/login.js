// After the login, back to the page that asked for it (a 401 page is served at that page's
// address). A token in the URL fragment (#token=..., never sent to the server) logs in at once;
// the fragment is removed first so that it stays out of the history.
(() => {
  const form = document.getElementById("login");
  if (!form.elements.next.value) form.elements.next.value = location.pathname + location.search;
  const m = /(?:^#|&)token=([^&]*)/.exec(location.hash);
  if (!m) return;
  history.replaceState(null, "", location.pathname + location.search);
  form.elements.token.value = decodeURIComponent(m[1]);
  form.submit();
})();
