/**
 * The error type of apiserver connection setup (kubeconfig, in-cluster configuration, --master). Its own
 * small module so that the CLI can recognise it without loading the kubeconfig loader and its library.
 */

/** A setup problem the operator must fix; the message is one line naming the file (or setting) and field. */
export class KubeconfigError extends Error {
  /**
   * `where` names the file or setting ("kubeconfig /etc/k", "in-cluster configuration", "--master");
   * `field` the offending field ("" when the whole thing is the problem).
   */
  constructor(where: string, field: string, problem: string) {
    super(field ? `${where}: ${field}: ${problem}` : `${where}: ${problem}`);
    this.name = "KubeconfigError";
  }
}
