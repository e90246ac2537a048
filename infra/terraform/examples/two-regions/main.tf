# Home region + one remote rollout region. The home bucket holds the lake; S3 replication copies
# weights/ into a bucket in the remote region, so remote rollout services pull weights over the
# local network, while tasks, claims and trajectories still go to the home bucket.
#   terraform init && terraform apply -var bucket=my-lake -var replica_bucket=my-lake-eu
#
# Replication does not keep order: weights/<m>/LATEST may arrive before the objects of its
# version; a rollout service that cannot pull a version yet logs it and tries again later.
# lakeflow's rollout service reads weights from its --lake today; reading them from the replica
# needs a weights mirror URL in its config (see infra/terraform/README.md).

terraform {
  required_version = ">= 1.6"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.60, < 6.0"
    }
  }
}

variable "home_region" {
  type    = string
  default = "us-east-1"
}

variable "remote_region" {
  type    = string
  default = "eu-west-1"
}

variable "bucket" {
  type = string
}

variable "replica_bucket" {
  type = string
}

variable "prefix" {
  type    = string
  default = "runs/exp1"
}

provider "aws" {
  region = var.home_region
}

provider "aws" {
  alias  = "remote"
  region = var.remote_region
}

module "lake" {
  source = "../../modules/lake"
  bucket = var.bucket
  prefix = var.prefix # versioning stays on: replication needs it
}

# --- the replica bucket in the remote region -------------------------------------------------

resource "aws_s3_bucket" "replica" {
  provider = aws.remote
  bucket   = var.replica_bucket
}

resource "aws_s3_bucket_public_access_block" "replica" {
  provider                = aws.remote
  bucket                  = aws_s3_bucket.replica.id
  block_public_acls       = true
  block_public_policy     = true
  ignore_public_acls      = true
  restrict_public_buckets = true
}

resource "aws_s3_bucket_server_side_encryption_configuration" "replica" {
  provider = aws.remote
  bucket   = aws_s3_bucket.replica.id
  rule {
    apply_server_side_encryption_by_default {
      sse_algorithm = "AES256"
    }
  }
}

resource "aws_s3_bucket_versioning" "replica" {
  provider = aws.remote
  bucket   = aws_s3_bucket.replica.id
  versioning_configuration {
    status = "Enabled"
  }
}

resource "aws_s3_bucket_lifecycle_configuration" "replica" {
  provider   = aws.remote
  bucket     = aws_s3_bucket.replica.id
  depends_on = [aws_s3_bucket_versioning.replica]
  rule {
    id     = "weights-noncurrent"
    status = "Enabled"
    filter {
      prefix = "${var.prefix}/weights/"
    }
    noncurrent_version_expiration {
      noncurrent_days = 3
    }
  }
}

# --- replication of weights/ (home -> remote) -------------------------------------------------

data "aws_iam_policy_document" "replication_trust" {
  statement {
    actions = ["sts:AssumeRole"]
    principals {
      type        = "Service"
      identifiers = ["s3.amazonaws.com"]
    }
  }
}

resource "aws_iam_role" "replication" {
  name               = "lakeflow-weights-replication"
  assume_role_policy = data.aws_iam_policy_document.replication_trust.json
}

resource "aws_iam_role_policy" "replication" {
  name = "replicate-weights"
  role = aws_iam_role.replication.id
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [
      {
        Sid      = "SourceBucket"
        Effect   = "Allow"
        Action   = ["s3:GetReplicationConfiguration", "s3:ListBucket"]
        Resource = module.lake.bucket_arn
      },
      {
        Sid      = "SourceObjects"
        Effect   = "Allow"
        Action   = ["s3:GetObjectVersionForReplication", "s3:GetObjectVersionAcl", "s3:GetObjectVersionTagging"]
        Resource = "${module.lake.bucket_arn}/${var.prefix}/weights/*"
      },
      {
        Sid      = "Destination"
        Effect   = "Allow"
        Action   = ["s3:ReplicateObject", "s3:ReplicateDelete", "s3:ReplicateTags"]
        Resource = "${aws_s3_bucket.replica.arn}/${var.prefix}/weights/*"
      },
    ]
  })
}

resource "aws_s3_bucket_replication_configuration" "weights" {
  bucket     = module.lake.bucket
  role       = aws_iam_role.replication.arn
  depends_on = [aws_s3_bucket_versioning.replica]
  rule {
    id     = "weights"
    status = "Enabled"
    filter {
      prefix = "${var.prefix}/weights/"
    }
    delete_marker_replication {
      status = "Enabled" # gc in the home region collects the replica too
    }
    destination {
      bucket        = aws_s3_bucket.replica.arn
      storage_class = "STANDARD"
    }
  }
}

# --- the rollout role may also read weights from the replica (and nothing else there) ---------

resource "aws_iam_role_policy" "raas_replica" {
  name = "replica-weights"
  role = module.lake.role_names["raas"]
  policy = jsonencode({
    Version = "2012-10-17"
    Statement = [{
      Sid      = "ReadReplicaWeights"
      Effect   = "Allow"
      Action   = "s3:GetObject"
      Resource = "${aws_s3_bucket.replica.arn}/${var.prefix}/weights/*"
    }]
  })
}

output "lake_url" {
  value = module.lake.lake_url
}

output "replica_weights_url" {
  value = "s3://${aws_s3_bucket.replica.bucket}/${var.prefix}"
}

output "role_arns" {
  value = module.lake.role_arns
}
