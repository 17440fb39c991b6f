// Validates Kubernetes objects (a JSON array on stdin) against their schemas: the API's own
// (kubernetes-models), KEDA's and the Prometheus operator's (@kubernetes-models/keda,
// @kubernetes-models/prometheus-operator); each object by its apiVersion and kind; an error names
// the object and the path. A kind none of them knows fails.
import { readFileSync } from "node:fs";

const CRD_PACKAGES = {
  "keda.sh": "@kubernetes-models/keda",
  "monitoring.coreos.com": "@kubernetes-models/prometheus-operator",
};
const objs = JSON.parse(readFileSync(0, "utf8"));
let bad = 0;
for (const o of objs) {
  const name = `${o.kind}/${o.metadata?.name ?? "?"}`;
  const group = o.apiVersion.includes("/") ? o.apiVersion.split("/")[0] : "";
  const pkg = CRD_PACKAGES[group] ?? "kubernetes-models";
  let cls;
  try {
    cls = (await import(`${pkg}/${o.apiVersion}/${o.kind}`))[o.kind];
  } catch {
    console.error(`FAIL ${name}: no schema for ${o.apiVersion} ${o.kind}`);
    bad++;
    continue;
  }
  try {
    new cls(o).validate();
    console.log(`  ${name}: valid ${o.apiVersion}`);
  } catch (e) {
    console.error(`FAIL ${name}: ${e.message}`);
    bad++;
  }
}
process.exit(bad ? 1 : 0);
