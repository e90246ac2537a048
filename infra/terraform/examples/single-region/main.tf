# One region: the lake's bucket and an IAM role per lakeflow role.
#   terraform init && terraform apply -var bucket=my-lake -var region=us-east-1
# Give each process its role (EKS pod identity / IRSA, an instance profile, or
# `aws sts assume-role`), and every process `--lake $(terraform output -raw lake_url)`.

terraform {
  required_version = ">= 1.6"
  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.60, < 6.0"
    }
  }
}

variable "region" {
  type    = string
  default = "us-east-1"
}

variable "bucket" {
  description = "Globally unique bucket name."
  type        = string
}

variable "prefix" {
  type    = string
  default = "runs/exp1"
}

variable "trusted_principals" {
  description = "Per lakeflow role, who may assume it (default: this account's IAM decides)."
  type        = map(list(string))
  default     = {}
}

provider "aws" {
  region = var.region
}

module "lake" {
  source             = "../../modules/lake"
  bucket             = var.bucket
  prefix             = var.prefix
  trusted_principals = var.trusted_principals
  tags               = { app = "lakeflow" }
}

output "lake_url" {
  value = module.lake.lake_url
}

output "role_arns" {
  value = module.lake.role_arns
}

output "env" {
  value = module.lake.env
}
