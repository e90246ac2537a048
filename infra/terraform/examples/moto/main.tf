# The module against an S3 + IAM server on this machine (moto in tests/infra; any server that
# speaks S3, IAM and STS): IAM users with access keys, since such servers have no instance roles.
#   terraform init && terraform apply -var endpoint=http://127.0.0.1:5000
#   terraform output -json access_keys

terraform {
  required_version = ">= 1.6"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.60, < 6.0"
    }
  }
}

variable "endpoint" {
  description = "URL of the S3 + IAM + STS server."
  type        = string
}

variable "bucket" {
  type    = string
  default = "lakeflow-lake"
}

variable "prefix" {
  type    = string
  default = "runs/tiny"
}

provider "aws" {
  region                      = "us-east-1"
  access_key                  = "testing"
  secret_key                  = "testing"
  s3_use_path_style           = true
  skip_credentials_validation = true
  skip_requesting_account_id  = true
  skip_metadata_api_check     = true
  skip_region_validation      = true
  endpoints {
    s3  = var.endpoint
    iam = var.endpoint
    sts = var.endpoint
  }
}

module "lake" {
  source          = "../../modules/lake"
  bucket          = var.bucket
  prefix          = var.prefix
  identity        = "user"
  models          = ["policy"] # one trainer and one rollout identity for the model of jobs/examples/tiny-math.yaml
  require_tls     = false      # the local server speaks plain HTTP
  lifecycle_rules = false      # it expires nothing; the provider would wait ~1 min for the rules to read back
  force_destroy   = true
}

output "lake_url" {
  value = module.lake.lake_url
}

output "access_keys" {
  value     = module.lake.access_keys
  sensitive = true
}

output "policies" {
  value = module.lake.policies
}
