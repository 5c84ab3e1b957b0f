// Every state-changing form carries data-confirm: ask before it is sent.
document.addEventListener("submit", function (event) {
  var text = event.target.getAttribute("data-confirm");
  if (text && !window.confirm(text)) {
    event.preventDefault();
  }
});
// Topic list search: hide the rows whose name does not contain the typed text.
document.addEventListener("input", function (event) {
  var box = event.target;
  if (!box.hasAttribute("data-filter")) return;
  var rows = document.querySelectorAll("#" + box.getAttribute("data-filter") + " tbody tr");
  var needle = box.value.toLowerCase();
  rows.forEach(function (row) {
    row.style.display = row.cells[0].textContent.toLowerCase().indexOf(needle) >= 0 ? "" : "none";
  });
});
