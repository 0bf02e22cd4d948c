/** Images from OCI registries (docs/images.md): references, the node's blob store, the registry client, pulls. */

// Parsed in model (a Pod's images are checked there, on every replica); re-exported for the image code.
export { formatReference, type ImageReference, isLoopbackRegistry, isRegistryReference, parseReference, registryEndpoint } from '../model/index.ts'
export { type BlobInfo, BlobStore, type BlobStoreOptions, type BlobWriteOptions, digestHex } from './blobs.ts'
export {
  type BlobSource,
  type ImageInfo,
  ImagePuller,
  type ImagePullerOptions,
  type PullOptions,
  type PullProgress,
  type PullResult,
  type RefRecord,
  type RegistryApi,
} from './pull.ts'
export { type Descriptor, MEDIA_TYPES, type RegistryAccess, RegistryClient, type RegistryClientOptions, type RegistryTls } from './registry.ts'
