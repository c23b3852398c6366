terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.0, < 7.0"
    }
  }
}

# Region A: the source cluster, its shipper and the primary bucket.
provider "aws" {
  alias  = "primary"
  region = var.primary_region

  default_tags {
    tags = var.tags
  }
}

# Region B: the DR bucket (replica), the applier and the mirror.
provider "aws" {
  alias  = "dr"
  region = var.dr_region

  default_tags {
    tags = var.tags
  }
}
