// What a page shows wrongly, for tests/server/test_web_page.py: a card whose content
// sticks out of it or scrolls sideways, a page wider than its window. Returns those
// problems and every text a person may read (the page's, titles and labels).
() => {
  const problems = [];
  const name = (node) =>
    node.id ? `#${node.id}` : `${node.tagName.toLowerCase()}.${[...node.classList].join(".")}`;
  const span = (box) => `${box.left.toFixed(0)}..${box.right.toFixed(0)}`;
  for (const card of document.querySelectorAll(".card")) {
    const edge = card.getBoundingClientRect();
    for (const node of card.querySelectorAll("*")) {
      if (node.closest(".visually-hidden, [hidden]")) continue;
      const box = node.getBoundingClientRect();
      if (box.width === 0 && box.height === 0) continue;
      if (box.right > edge.right + 0.5 || box.left < edge.left - 0.5) {
        problems.push(`${name(node)} sticks out of ${name(card)} (${span(box)} in ${span(edge)})`);
      }
      const scrolls = getComputedStyle(node).overflowX !== "visible";
      if (scrolls && node.scrollWidth > node.clientWidth + 1) {
        problems.push(`${name(node)} scrolls sideways (${node.scrollWidth} > ${node.clientWidth})`);
      }
    }
  }
  const page = document.documentElement.scrollWidth;
  if (page > window.innerWidth) problems.push(`the page is ${page} px wide, its window ${window.innerWidth}`);
  const said = [...document.querySelectorAll("[title], [aria-label]")].map(
    (node) => `${node.getAttribute("title") || ""} ${node.getAttribute("aria-label") || ""}`,
  );
  return { problems, text: [document.body.innerText, ...said].join("\n") };
}
