/**
 * The netlink encoder met a statement it does not translate. The writer then hands the whole
 * transaction to the libnftables / `nft -f -` path, which understands every nft statement.
 */

/** A statement (or part of one) the netlink encoder does not know. */
export class NftNetlinkUnsupported extends Error {
  /**
   * `statement` is the transaction line, `what` the part the encoder stopped at (e.g. "iifname").
   */
  constructor(readonly statement: string, readonly what: string) {
    super(`nftables netlink encoder: unsupported ${what} in: ${statement}`);
    this.name = "NftNetlinkUnsupported";
  }
}
