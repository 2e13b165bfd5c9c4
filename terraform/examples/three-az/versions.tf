terraform {
  required_version = ">= 1.5.0"

  required_providers {
    aws = {
      source  = "hashicorp/aws"
      version = ">= 5.40"
    }
    random = {
      source  = "hashicorp/random"
      version = ">= 3.5"
    }
  }
}

# Region and credentials come from the environment (AWS_REGION / AWS_PROFILE, or an
# assumed role), never from this file.
provider "aws" {
  default_tags {
    tags = {
      Application = "oxbow"
      Deployment  = var.name
    }
  }
}
