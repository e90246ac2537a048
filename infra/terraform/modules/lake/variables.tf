variable "bucket" {
  description = "Name of the lake's bucket (created by this module)."
  type        = string
}

variable "prefix" {
  description = "The lake's prefix in the bucket: the lake URL is s3://<bucket>/<prefix>. Every policy is scoped to it."
  type        = string
  default     = "lake"
  validation {
    condition     = can(regex("^[A-Za-z0-9._=-]+(/[A-Za-z0-9._=-]+)*$", var.prefix))
    error_message = "prefix must be a non-empty path like 'runs/exp1' (no leading or trailing '/', no wildcards)."
  }
}

variable "name_prefix" {
  description = "Prefix of the IAM roles / users: <name_prefix>-<role>."
  type        = string
  default     = "lakeflow"
}

variable "roles" {
  description = "The lakeflow roles to create identities for."
  type        = set(string)
  default     = ["raas", "dataflow", "trainer", "eval", "analyst"]
  validation {
    condition     = length(setsubtract(var.roles, ["raas", "dataflow", "trainer", "eval", "analyst"])) == 0
    error_message = "roles may only contain raas, dataflow, trainer, eval and analyst."
  }
}

variable "models" {
  description = "Model ids of the lake. Each gets its own trainer and rollout identity (trainer-<model>, raas-<model>) that can write only that model's weights, checkpoints, stats, claims and shards; empty: one trainer and one rollout identity for every model (a rollout pool whose workflow writes samples of several models needs that)."
  type        = list(string)
  default     = []
  validation {
    condition     = alltrue([for m in var.models : can(regex("^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$", m))])
    error_message = "model ids are 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit."
  }
}

variable "identity" {
  description = "'role': an IAM role per lakeflow role, assumed by trusted_principals (AWS; no long-lived keys). 'user': an IAM user with an inline policy and an access key per role (S3-compatible servers without STS, moto in tests)."
  type        = string
  default     = "role"
  validation {
    condition     = contains(["role", "user"], var.identity)
    error_message = "identity must be 'role' or 'user'."
  }
}

variable "trusted_principals" {
  description = "identity = 'role': per lakeflow role (or identity, e.g. trainer-<model>), the principal ARNs allowed to assume it (e.g. an EKS pod identity or instance role). A role not listed trusts this account's root, so the account's IAM decides."
  type        = map(list(string))
  default     = {}
}

variable "partition" {
  description = "ARN partition: aws, aws-cn or aws-us-gov."
  type        = string
  default     = "aws"
}

variable "versioning" {
  description = "Keep noncurrent versions (needed for replication; recovers overwritten or deleted objects). Noncurrent versions expire per prefix, see *_noncurrent_days."
  type        = bool
  default     = true
}

variable "history_noncurrent_days" {
  description = "Days noncurrent versions of trajectories/, _commits/ and batches/ are kept (objects written once: only a deletion makes one)."
  type        = number
  default     = 30
}

variable "weights_noncurrent_days" {
  description = "Days noncurrent versions under weights/ and checkpoints/ are kept: short, so `lakeflow weights gc` frees the storage it deletes."
  type        = number
  default     = 3
}

variable "churn_noncurrent_days" {
  description = "Days noncurrent versions of the objects rewritten all the time (claims, leases, heartbeats, catalog checkpoints) are kept."
  type        = number
  default     = 1
}

variable "quarantine_days" {
  description = "Days after which records under _quarantine/ expire."
  type        = number
  default     = 30
}

variable "lifecycle_rules" {
  description = "Attach the lifecycle rules below (turn off only for local test servers: they expire nothing, and the AWS provider waits about a minute for the rules to read back from them)."
  type        = bool
  default     = true
}

variable "abort_multipart_days" {
  description = "Days after which incomplete multipart uploads are aborted."
  type        = number
  default     = 1
}

variable "trajectories_transition" {
  description = "Optional: move trajectory shards to another storage class after some days. Only instantly readable classes (STANDARD_IA, ONEZONE_IA, INTELLIGENT_TIERING, GLACIER_IR): lakeflow sql and the trainer read old shards."
  type = object({
    days          = number
    storage_class = string
  })
  default = null
  validation {
    condition     = var.trajectories_transition == null ? true : contains(["STANDARD_IA", "ONEZONE_IA", "INTELLIGENT_TIERING", "GLACIER_IR"], var.trajectories_transition.storage_class)
    error_message = "trajectories_transition.storage_class must be STANDARD_IA, ONEZONE_IA, INTELLIGENT_TIERING or GLACIER_IR."
  }
}

variable "kms_key_arn" {
  description = "Optional KMS key for SSE-KMS (default: SSE-S3, AES256). Each role is then also allowed kms:Decrypt and kms:GenerateDataKey on it."
  type        = string
  default     = null
}

variable "require_tls" {
  description = "Attach a bucket policy that denies requests without TLS (turn off only for local test servers)."
  type        = bool
  default     = true
}

variable "force_destroy" {
  description = "Allow `terraform destroy` to delete a bucket that still holds objects."
  type        = bool
  default     = false
}

variable "tags" {
  description = "Tags for every resource."
  type        = map(string)
  default     = {}
}
