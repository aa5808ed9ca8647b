// The login form: says so when the last attempt was refused.
if (new URLSearchParams(location.search).has('failed')) {
  document.getElementById('failed').hidden = false;
}
