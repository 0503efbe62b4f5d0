/**
 * The feature gates kube-proxy v1.34 knows, and what `--feature-gates` / `featureGates` may do with them.
 *
 * kube-proxy registers every Kubernetes gate (its binary shares one gate registry with the other
 * components), so a gate written for the kubelet is accepted; a name it does not know is an error, and a gate
 * locked to its default (GA or deprecated, LockToDefault) refuses the other value. Messages are upstream's
 * (k8s.io/component-base/featuregate, Set/SetFromMap).
 *
 * The table is upstream's state at v1.34: the versioned specs of pkg/features/kube_features.go (which also
 * relists the generic-apiserver, apiextensions, controller-manager and zpages gates), each evaluated at
 * v1.34, plus the gates registered beside them: client-go's (k8s.io/client-go/features) and the logging
 * gates (k8s.io/component-base/logs/api/v1). `AllAlpha` and `AllBeta` are the registry's own.
 *
 * Gates that change what kube-proxy programs at v1.34, and how edgeproxy treats them:
 * - PreferSameTrafficDistribution (beta, on): honoured — off ignores `hints.forNodes` (PreferSameNode).
 * - LoadBalancerIPMode, TopologyAwareHints, ServiceTrafficDistribution, NFTablesProxyMode,
 *   MultiCIDRServiceAllocator (GA, locked to true): only `true` is accepted, as upstream.
 * - LoggingAlphaOptions: gates the alpha logging options (lib/config/validate.ts).
 * Every other gate is accepted and has no effect on edgeproxy.
 */
import { type FieldError, fieldError } from "./field_error.ts";

/** Maturity of a gate (upstream featuregate.prerelease). */
export type PreRelease = "ALPHA" | "BETA" | "GA" | "DEPRECATED";

/** A gate's spec at v1.34 (upstream featuregate.FeatureSpec). */
export interface FeatureSpec {
  readonly default: boolean;
  readonly preRelease: PreRelease;
  /** The gate cannot be set to anything but its default. */
  readonly lockToDefault: boolean;
}

const spec = (preRelease: PreRelease, def: boolean, lockToDefault = false): FeatureSpec => ({
  default: def,
  preRelease,
  lockToDefault,
});
const alpha = () => spec("ALPHA", false);
const beta = (def: boolean) => spec("BETA", def);
const ga = (def: boolean) => spec("GA", def);
const gaLocked = (def: boolean) => spec("GA", def, true);
const deprecated = (def: boolean) => spec("DEPRECATED", def);
const deprecatedLocked = (def: boolean) => spec("DEPRECATED", def, true);

/** Every gate kube-proxy v1.34 accepts, by name. */
export const KNOWN_FEATURE_GATES: Readonly<Record<string, FeatureSpec>> = {
  AllAlpha: alpha(),
  AllBeta: spec("BETA", false),
  APIResponseCompression: beta(true),
  APIServerIdentity: beta(true),
  APIServerTracing: gaLocked(true),
  APIServingWithRoutine: alpha(),
  AggregatedDiscoveryRemoveBetaType: deprecated(true),
  AllowDNSOnlyNodeCSR: deprecated(false),
  AllowInsecureKubeletCertificateSigningRequests: deprecated(false),
  AllowOverwriteTerminationGracePeriodSeconds: deprecated(false),
  AllowParsingUserUIDFromCertAuth: beta(true),
  AllowServiceLBStatusOnNonLB: deprecatedLocked(false),
  AllowUnsafeMalformedObjectDeletion: alpha(),
  AnonymousAuthConfigurableEndpoints: gaLocked(true),
  AnyVolumeDataSource: gaLocked(true),
  AuthorizeNodeWithSelectors: gaLocked(true),
  AuthorizeWithSelectors: gaLocked(true),
  BtreeWatchCache: gaLocked(true),
  CBORServingAndStorage: alpha(),
  CPUManagerPolicyAlphaOptions: alpha(),
  CPUManagerPolicyBetaOptions: beta(true),
  CPUManagerPolicyOptions: gaLocked(true),
  CRDValidationRatcheting: gaLocked(true),
  CSIMigrationPortworx: gaLocked(true),
  CSIVolumeHealth: alpha(),
  ClearingNominatedNodeNameAfterBinding: alpha(),
  ClientsAllowCBOR: alpha(),
  ClientsPreferCBOR: alpha(),
  CloudControllerManagerWebhook: alpha(),
  ClusterTrustBundle: beta(false),
  ClusterTrustBundleProjection: beta(false),
  ComponentFlagz: alpha(),
  ComponentStatusz: alpha(),
  ConcurrentWatchObjectDecode: beta(false),
  ConsistentListFromCache: gaLocked(true),
  ContainerCheckpoint: beta(true),
  ContainerRestartRules: alpha(),
  ContainerStopSignals: alpha(),
  ContextualLogging: beta(true),
  CoordinatedLeaderElection: beta(false),
  CronJobsScheduledAnnotation: gaLocked(true),
  CrossNamespaceVolumeDataSource: alpha(),
  CustomCPUCFSQuotaPeriod: alpha(),
  CustomResourceFieldSelectors: gaLocked(true),
  DRAAdminAccess: beta(true),
  DRAConsumableCapacity: alpha(),
  DRADeviceBindingConditions: alpha(),
  DRADeviceTaints: alpha(),
  DRAExtendedResource: alpha(),
  DRAPartitionableDevices: alpha(),
  DRAPrioritizedList: beta(true),
  DRAResourceClaimDeviceStatus: beta(true),
  DRASchedulerFilterTimeout: beta(true),
  DeclarativeValidation: beta(true),
  DeclarativeValidationTakeover: beta(false),
  DeploymentReplicaSetTerminatingReplicas: alpha(),
  DetectCacheInconsistency: beta(true),
  DisableAllocatorDualWrite: ga(true),
  DisableCPUQuotaWithExclusiveCPUs: beta(true),
  DisableNodeKubeProxyVersion: deprecated(true),
  DynamicResourceAllocation: ga(true),
  EnvFiles: alpha(),
  EventedPLEG: alpha(),
  ExecProbeTimeout: ga(true),
  ExternalServiceAccountTokenSigner: beta(true),
  GitRepoVolumeDriver: deprecated(false),
  GracefulNodeShutdown: beta(true),
  GracefulNodeShutdownBasedOnPodPriority: beta(true),
  HPAConfigurableTolerance: alpha(),
  HPAScaleToZero: alpha(),
  HonorPVReclaimPolicy: gaLocked(true),
  HostnameOverride: alpha(),
  ImageMaximumGCAge: beta(true),
  ImageVolume: beta(false),
  InOrderInformers: beta(true),
  InPlacePodVerticalScaling: beta(true),
  InPlacePodVerticalScalingAllocatedStatus: deprecated(false),
  InPlacePodVerticalScalingExclusiveCPUs: alpha(),
  InPlacePodVerticalScalingExclusiveMemory: alpha(),
  InTreePluginPortworxUnregister: alpha(),
  InformerResourceVersion: alpha(),
  JobBackoffLimitPerIndex: gaLocked(true),
  JobManagedBy: beta(true),
  JobPodReplacementPolicy: gaLocked(true),
  JobSuccessPolicy: gaLocked(true),
  KMSv1: deprecated(false),
  KubeletCgroupDriverFromCRI: gaLocked(true),
  KubeletCrashLoopBackOffMax: alpha(),
  KubeletEnsureSecretPulledImages: alpha(),
  KubeletFineGrainedAuthz: beta(true),
  KubeletInUserNamespace: alpha(),
  KubeletPSI: beta(true),
  KubeletPodResourcesDynamicResources: beta(true),
  KubeletPodResourcesGet: beta(true),
  KubeletPodResourcesListUseActivePods: deprecated(true),
  KubeletRegistrationGetOnExistsOnly: deprecated(false),
  KubeletSeparateDiskGC: beta(true),
  KubeletServiceAccountTokenForCredentialProviders: beta(true),
  KubeletTracing: gaLocked(true),
  LegacySidecarContainers: deprecated(false),
  ListFromCacheSnapshot: beta(true),
  LoadBalancerIPMode: gaLocked(true),
  LocalStorageCapacityIsolationFSQuotaMonitoring: beta(false),
  LogarithmicScaleDown: gaLocked(true),
  LoggingAlphaOptions: alpha(),
  LoggingBetaOptions: beta(true),
  MatchLabelKeysInPodAffinity: gaLocked(true),
  MatchLabelKeysInPodTopologySpread: beta(true),
  MatchLabelKeysInPodTopologySpreadSelectorMerge: beta(true),
  MaxUnavailableStatefulSet: alpha(),
  MemoryManager: gaLocked(true),
  MemoryQoS: alpha(),
  MultiCIDRServiceAllocator: gaLocked(true),
  MutableCSINodeAllocatableCount: beta(false),
  MutatingAdmissionPolicy: beta(false),
  NFTablesProxyMode: gaLocked(true),
  NodeInclusionPolicyInPodTopologySpread: gaLocked(true),
  NodeLogQuery: beta(false),
  NodeSwap: gaLocked(true),
  NominatedNodeNameForExpectation: alpha(),
  OpenAPIEnums: beta(true),
  OrderedNamespaceDeletion: gaLocked(true),
  PodAndContainerStatsFromCRI: alpha(),
  PodCertificateRequest: alpha(),
  PodDeletionCost: beta(true),
  PodIndexLabel: gaLocked(true),
  PodLevelResources: beta(true),
  PodLifecycleSleepAction: gaLocked(true),
  PodLifecycleSleepActionAllowZero: gaLocked(true),
  PodLogsQuerySplitStreams: alpha(),
  PodObservedGenerationTracking: beta(true),
  PodReadyToStartContainersCondition: beta(true),
  PodSchedulingReadiness: gaLocked(true),
  PodTopologyLabelsAdmission: alpha(),
  PortForwardWebsockets: beta(true),
  PreferSameTrafficDistribution: beta(true),
  PreventStaticPodAPIReferences: beta(true),
  ProcMountType: beta(true),
  QOSReserved: alpha(),
  RecoverVolumeExpansionFailure: gaLocked(true),
  RecursiveReadOnlyMounts: gaLocked(true),
  ReduceDefaultCrashLoopBackOffDecay: alpha(),
  RelaxedDNSSearchValidation: gaLocked(true),
  RelaxedEnvironmentVariableValidation: gaLocked(true),
  RelaxedServiceNameValidation: alpha(),
  ReloadKubeletServerCertificateFile: beta(true),
  RemoteRequestHeaderUID: beta(true),
  ResilientWatchCacheInitialization: gaLocked(true),
  ResourceHealthStatus: alpha(),
  RetryGenerateName: gaLocked(true),
  RotateKubeletServerCertificate: beta(true),
  RuntimeClassInImageCriAPI: alpha(),
  SELinuxChangePolicy: beta(true),
  SELinuxMount: beta(false),
  SELinuxMountReadWriteOncePod: beta(true),
  SchedulerAsyncAPICalls: beta(false),
  SchedulerAsyncPreemption: beta(true),
  SchedulerPopFromBackoffQ: beta(true),
  SchedulerQueueingHints: gaLocked(true),
  SeparateCacheWatchRPC: deprecated(false),
  SeparateTaintEvictionController: gaLocked(true),
  ServiceAccountNodeAudienceRestriction: beta(true),
  ServiceAccountTokenJTI: gaLocked(true),
  ServiceAccountTokenNodeBinding: gaLocked(true),
  ServiceAccountTokenNodeBindingValidation: gaLocked(true),
  ServiceAccountTokenPodNodeInfo: gaLocked(true),
  ServiceTrafficDistribution: gaLocked(true),
  SidecarContainers: gaLocked(true),
  SizeBasedListCostEstimate: beta(true),
  SizeMemoryBackedVolumes: gaLocked(true),
  StatefulSetAutoDeletePVC: gaLocked(true),
  StatefulSetSemanticRevisionComparison: beta(true),
  StorageCapacityScoring: alpha(),
  StorageNamespaceIndex: deprecated(true),
  StorageVersionAPI: alpha(),
  StorageVersionHash: beta(true),
  StorageVersionMigrator: alpha(),
  StreamingCollectionEncodingToJSON: gaLocked(true),
  StreamingCollectionEncodingToProtobuf: gaLocked(true),
  StrictCostEnforcementForVAP: gaLocked(true),
  StrictCostEnforcementForWebhooks: gaLocked(true),
  StrictIPCIDRValidation: alpha(),
  StructuredAuthenticationConfiguration: gaLocked(true),
  StructuredAuthenticationConfigurationEgressSelector: beta(true),
  StructuredAuthorizationConfiguration: gaLocked(true),
  SupplementalGroupsPolicy: beta(true),
  SystemdWatchdog: beta(true),
  TokenRequestServiceAccountUIDValidation: beta(true),
  TopologyAwareHints: gaLocked(true),
  TopologyManagerPolicyAlphaOptions: alpha(),
  TopologyManagerPolicyBetaOptions: beta(true),
  TopologyManagerPolicyOptions: ga(true),
  TranslateStreamCloseWebsocketRequests: beta(true),
  UnauthenticatedHTTP2DOSMitigation: beta(true),
  UnknownVersionInteroperabilityProxy: alpha(),
  UserNamespacesPodSecurityStandards: alpha(),
  UserNamespacesSupport: beta(true),
  VolumeAttributesClass: ga(true),
  WatchCacheInitializationPostStartHook: beta(false),
  WatchFromStorageWithoutResourceVersion: deprecatedLocked(false),
  WatchList: beta(true),
  WatchListClient: beta(false),
  WinDSR: gaLocked(true),
  WinOverlay: gaLocked(true),
  WindowsCPUAndMemoryAffinity: alpha(),
  WindowsGracefulNodeShutdown: beta(true),
  WindowsHostNetwork: deprecated(false),
};

/**
 * Checks `featureGates` as upstream's SetFromMap does, in name order: an unknown name, or a locked gate set
 * to the other value, is an error (the first one is reported, like upstream's early return).
 */
export function validateFeatureGates(gates: Readonly<Record<string, boolean>>): FieldError[] {
  for (const name of Object.keys(gates).sort()) {
    const value = gates[name];
    const s = Object.hasOwn(KNOWN_FEATURE_GATES, name) ? KNOWN_FEATURE_GATES[name] : undefined;
    if (s === undefined) return [fieldError("featureGates", `unrecognized feature gate: ${name}`)];
    if (s.lockToDefault && value !== s.default) {
      return [
        fieldError(
          "featureGates",
          `cannot set feature gate ${name} to ${value}, feature is locked to ${s.default}`,
        ),
      ];
    }
  }
  return [];
}

/** Upstream's warnings for setting a GA or deprecated gate (it will be removed in a future release). */
export function featureGateWarnings(gates: Readonly<Record<string, boolean>>): string[] {
  const out: string[] = [];
  for (const name of Object.keys(gates).sort()) {
    const s = Object.hasOwn(KNOWN_FEATURE_GATES, name) ? KNOWN_FEATURE_GATES[name] : undefined;
    if (s?.preRelease === "GA" || s?.preRelease === "DEPRECATED") {
      const what = s.preRelease === "GA" ? "GA" : "deprecated";
      out.push(
        `Setting ${what} feature gate ${name}=${gates[name]}. It will be removed in a future release.`,
      );
    }
  }
  return out;
}

/**
 * Whether `name` is enabled: the value set in `gates`; else, for an alpha or beta gate, `AllAlpha` /
 * `AllBeta` when set; else the gate's default at v1.34.
 */
export function featureEnabled(gates: Readonly<Record<string, boolean>>, name: string): boolean {
  if (Object.hasOwn(gates, name)) return gates[name];
  const s = Object.hasOwn(KNOWN_FEATURE_GATES, name) ? KNOWN_FEATURE_GATES[name] : undefined;
  if (s === undefined) return false;
  if (s.preRelease === "ALPHA" && Object.hasOwn(gates, "AllAlpha")) return gates.AllAlpha;
  if (s.preRelease === "BETA" && Object.hasOwn(gates, "AllBeta")) return gates.AllBeta;
  return s.default;
}
