import { test } from "node:test";
import assert from "node:assert/strict";
import {
  matchFields,
  matchLabels,
  parseFieldSelector,
  parseLabelSelector,
  SelectorError,
} from "../../support/apiserver_selectors.ts";
import { PROXY_LABEL_SELECTOR } from "../../../lib/k8s/objects.ts";
import { matchesProxyLabels } from "../../../lib/source/manifests.ts";

test("label selector grammar: every requirement form parses", () => {
  assert.deepEqual(parseLabelSelector(""), []);
  assert.deepEqual(parseLabelSelector("  "), []);
  assert.deepEqual(parseLabelSelector("a"), [{ key: "a", op: "exists", values: [] }]);
  assert.deepEqual(parseLabelSelector("!a"), [{ key: "a", op: "!", values: [] }]);
  assert.deepEqual(parseLabelSelector("a=b"), [{ key: "a", op: "=", values: ["b"] }]);
  assert.deepEqual(parseLabelSelector("a==b"), [{ key: "a", op: "=", values: ["b"] }]);
  assert.deepEqual(parseLabelSelector("a!=b"), [{ key: "a", op: "!=", values: ["b"] }]);
  assert.deepEqual(parseLabelSelector("a="), [{ key: "a", op: "=", values: [""] }]);
  assert.deepEqual(parseLabelSelector("a in (x, y)"), [{ key: "a", op: "in", values: ["x", "y"] }]);
  assert.deepEqual(parseLabelSelector("a notin (x)"), [{ key: "a", op: "notin", values: ["x"] }]);
  assert.deepEqual(parseLabelSelector("a>3,b<10"), [
    { key: "a", op: "gt", values: ["3"] },
    { key: "b", op: "lt", values: ["10"] },
  ]);
  assert.deepEqual(parseLabelSelector(PROXY_LABEL_SELECTOR), [
    { key: "service.kubernetes.io/service-proxy-name", op: "!", values: [] },
    { key: "service.kubernetes.io/headless", op: "!", values: [] },
  ]);
  assert.deepEqual(parseLabelSelector(" app = web , !canary "), [
    { key: "app", op: "=", values: ["web"] },
    { key: "canary", op: "!", values: [] },
  ]);
});

test("label selector syntax errors throw SelectorError with the apiserver's wording", () => {
  const cases: Array<[string, RegExp]> = [
    ["a b", /found 'b', expected: in, notin, =, ==, !=, gt, lt/],
    ["a=b c", /found 'c', expected: ',' or 'end of string'/],
    ["a in b", /expected: '\('/],
    ["a in ()", /values set can't be empty/],
    ["a,", /expected: !, identifier/],
    [",a", /expected: !, identifier/],
    ["!", /expected: identifier/],
    ["a=(", /expected: identifier/],
    ["a>b", /must be an integer/],
    ["-a", /name part must consist of alphanumeric/],
    ["Foo.Bar/x", /prefix part must be a lowercase RFC 1123 subdomain/],
    ["a=-x", /a valid label must be an empty string/],
    [`a=${"v".repeat(64)}`, /a valid label/],
  ];
  for (const [sel, re] of cases) {
    assert.throws(
      () => parseLabelSelector(sel),
      (e: unknown) => e instanceof SelectorError && re.test(e.message),
      sel,
    );
  }
});

test("label matching: != and notin match objects without the key; in/= need it", () => {
  const l = { app: "web", tier: "front", n: "5" };
  const m = (sel: string, labels: Record<string, string> | null = l) =>
    matchLabels(parseLabelSelector(sel), labels ?? undefined);
  assert.equal(m(""), true);
  assert.equal(m("app"), true);
  assert.equal(m("!app"), false);
  assert.equal(m("missing"), false);
  assert.equal(m("!missing"), true);
  assert.equal(m("app=web"), true);
  assert.equal(m("app=db"), false);
  assert.equal(m("app!=db"), true);
  assert.equal(m("missing!=x"), true);
  assert.equal(m("missing=x"), false);
  assert.equal(m("tier in (back,front)"), true);
  assert.equal(m("missing in (x)"), false);
  assert.equal(m("tier notin (front)"), false);
  assert.equal(m("missing notin (x)"), true);
  assert.equal(m("n>4,n<6"), true);
  assert.equal(m("n>5"), false);
  assert.equal(m("app>1"), false, "non-integer label value never matches gt/lt");
  assert.equal(m("app=web,tier=back"), false);
  assert.equal(m("app", null), false);
  assert.equal(m("!app", null), true);
});

test("the manifests source and the apiserver agree on the proxy label selector", () => {
  const sel = parseLabelSelector(PROXY_LABEL_SELECTOR);
  const cases: Array<Record<string, string> | undefined> = [
    undefined,
    {},
    { app: "x" },
    { "service.kubernetes.io/service-proxy-name": "" },
    { "service.kubernetes.io/service-proxy-name": "cilium" },
    { "service.kubernetes.io/headless": "" },
    { "service.kubernetes.io/headless": "", app: "x" },
    { "kubernetes.io/service-name": "web" },
  ];
  for (const labels of cases) {
    assert.equal(matchesProxyLabels(labels), matchLabels(sel, labels), JSON.stringify(labels));
  }
});

test("field selectors: =, ==, != on supported fields; unknown field and bad syntax throw", () => {
  const fields = ["metadata.name", "metadata.namespace", "spec.unschedulable"];
  assert.deepEqual(parseFieldSelector("", fields), []);
  assert.deepEqual(parseFieldSelector("metadata.name=x,metadata.namespace==y,metadata.name!=z", fields), [
    { field: "metadata.name", op: "=", value: "x" },
    { field: "metadata.namespace", op: "=", value: "y" },
    { field: "metadata.name", op: "!=", value: "z" },
  ]);
  assert.deepEqual(parseFieldSelector("metadata.name=a\\,b", fields), [
    { field: "metadata.name", op: "=", value: "a,b" },
  ]);
  assert.throws(
    () => parseFieldSelector("spec.nodeName=x", fields),
    /field label not supported: spec.nodeName/,
  );
  assert.throws(() => parseFieldSelector("metadata.name", fields), /can't understand 'metadata.name'/);
  const obj = { metadata: { name: "edge-1" }, spec: {} };
  assert.equal(matchFields(parseFieldSelector("metadata.name=edge-1", fields), obj), true);
  assert.equal(matchFields(parseFieldSelector("metadata.name!=edge-1", fields), obj), false);
  assert.equal(
    matchFields(parseFieldSelector("metadata.namespace=", fields), obj),
    true,
    "cluster-scoped: ''",
  );
  assert.equal(matchFields(parseFieldSelector("spec.unschedulable=false", fields), obj), true);
});
